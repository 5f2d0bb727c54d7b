"""zCDP tiers in the config: ``accounting = "zcdp"``, ``rho`` in place of ``epsilon``, ``budget`` in ρ;
errors name the file and the field."""

from __future__ import annotations

import copy

import pytest

from config import ConfigError, parse_config
from mechanisms.accounting import pure_epsilon

BASE = {
    "server": {"auth": "trust"},
    "tiers": {"z": {"accounting": "zcdp", "rho": 0.05, "budget": 1}},
    "roles": {"a": {"tier": "z"}},
    "tables": {"t": {"columns": {"age": {"type": "int", "lower": 0, "upper": 100}}}},
}


def _tier(**kw):
    d = copy.deepcopy(BASE)
    d["tiers"]["z"].update(kw)
    for k in [k for k, v in kw.items() if v is None]:
        del d["tiers"]["z"][k]
    return d


def test_a_zcdp_tier_charges_rho_and_runs_pure_mechanisms_at_root_two_rho():
    t = parse_config(BASE, "my.toml").tiers["z"]
    assert (t.accounting, t.rho, t.budget, t.amount) == ("zcdp", 0.05, 1, 0.05)
    assert t.epsilon == pure_epsilon(0.05)  # Bun & Steinke 2016 Prop 1.4, one rule in config and mechanisms
    assert t.conversion_delta == 1e-6
    again = parse_config({**BASE, "tiers": {"z": t.model_dump()}}, "my.toml").tiers["z"]
    assert again == t  # the derived ε reads back


@pytest.mark.parametrize(
    "kw,field,words",
    [
        ({"rho": None}, "tiers.z.rho", "rho = "),
        ({"epsilon": 0.5}, "tiers.z.epsilon", "charges rho"),
        ({"rho": 2}, "tiers.z", "exceeds the budget"),
        ({"ladder": "l"}, "tiers.z", "ladder"),
        ({"accounting": "pure", "epsilon": 1}, "tiers.z.rho", "only a tier with accounting = 'zcdp'"),
        ({"accounting": "renyi"}, "tiers.z.accounting", ""),
        ({"conversion_delta": 0}, "tiers.z.conversion_delta", ""),
    ],
)
def test_errors_name_the_file_and_field(kw, field, words):
    with pytest.raises(ConfigError) as e:
        parse_config(_tier(**kw), "my.toml")
    msg = str(e.value)
    assert msg.startswith(f"my.toml: {field}: ") and words in msg, msg
