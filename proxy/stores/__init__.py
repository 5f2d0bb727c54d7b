"""Durable state: the budget ledger and the release cache (:mod:`.ledger`), the multi-tier
ladders (:mod:`.ladder_store`), on SQLite or, shared by several proxies, on Postgres
(:mod:`.pgstore`)."""
