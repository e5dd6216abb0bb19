"""Alerts to SAN's engineers: a failed run or a failed asset check, posted to Slack."""
