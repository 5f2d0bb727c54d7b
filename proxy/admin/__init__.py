"""The owner page: ``dpgate serve --admin-http HOST:PORT``, read-only, admin roles only."""

from .server import AdminHttp, check_password, collect

__all__ = ["AdminHttp", "check_password", "collect"]
