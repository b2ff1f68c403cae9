"""What a codec costs a server, as ratios to the floor and to its peers, measured in one interleaved run.

`statecodec bench` is the command: `cases` declares what is measured,
`measure` times it and builds the JSON document, `report` renders it.
"""
