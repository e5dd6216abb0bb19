"""How a story says instants, durations and long texts (the CLI's and the UI's explain)."""

from datetime import datetime, timedelta


def at(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def age(delta: timedelta) -> str:
    """A duration the way people say it: seconds, minutes, hours and minutes, days and hours."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 2 * 3600:
        return f"{seconds // 60} min"
    if seconds < 2 * 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


def shorten(text: str | None, limit: int = 120) -> str:
    """One line of at most `limit` characters (an error message in a table)."""
    if not text:
        return ""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
