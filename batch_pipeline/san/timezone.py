"""SAN's calendar time zone: schedules fire and TIL days are cut in it (SAN_TIMEZONE)."""

import os
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DEFAULT_TIMEZONE = "Asia/Seoul"


class TimezoneConfigError(ValueError):
    pass


def san_timezone_name() -> str:
    """The IANA zone from SAN_TIMEZONE (default Asia/Seoul); an unknown zone is a clear error."""
    name = (os.environ.get("SAN_TIMEZONE") or DEFAULT_TIMEZONE).strip()
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise TimezoneConfigError(
            f"SAN_TIMEZONE={name!r} is not a known IANA time zone (e.g. Asia/Seoul, "
            "America/New_York)"
        ) from error
    return name
