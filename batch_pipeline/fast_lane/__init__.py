"""The fast lane: heal lost events, failed AI calls and dead app saves within seconds, between
the design's 2-hourly recovery runs. announcements.py (lost events) and retries.py (failed calls,
app deaths) hold the rules as plain functions; tick.py is one tick of the lane; sensors.py runs
it every few seconds and requests a fast_heal_job run (assets.py) only when there is a target to
write for."""
