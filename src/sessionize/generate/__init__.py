"""The synthetic visit generator (`sessionize generate`) and publishing to Kafka/Kinesis.

config.py (settings) -> visits.py (users, visits, events as numpy arrays) ->
layout.py (files, arrival times, duplicates, late and invalid lines) -> lines.py (JSON text)
-> writer.py (the hourly file tree, or lines for publish.py to send to a broker).
"""
