"""SAN's calendar time zone: schedules fire and TIL days are cut in it (SAN_TIMEZONE)."""

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from batch_pipeline.san.settings import Setting

DEFAULT_TIMEZONE = "Asia/Seoul"
SAN_TIMEZONE = Setting(
    "SAN_TIMEZONE",
    DEFAULT_TIMEZONE,
    "IANA zone of the schedules and of the TIL's days (an unknown zone is an error at load)",
)


class TimezoneConfigError(ValueError):
    pass


def san_timezone_name() -> str:
    """The IANA zone from SAN_TIMEZONE (default Asia/Seoul); an unknown zone is a clear error."""
    name = SAN_TIMEZONE.raw() or DEFAULT_TIMEZONE
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise TimezoneConfigError(
            f"SAN_TIMEZONE={name!r} is not a known IANA time zone (e.g. Asia/Seoul, "
            "America/New_York)"
        ) from error
    return name
