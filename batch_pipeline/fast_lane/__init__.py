"""The fast lane: heal lost events, failed AI calls and dead app saves within minutes, between
the design's 2-hourly recovery runs (rules.py), with a sensor that requests a small run only
when a probe finds something to heal (sensors.py)."""
