"""What an account pays for while nothing runs: standing charges.

Volumes attached to nothing (or only to stopped instances), snapshots nothing needs and
addresses held by nothing bill by the month whether or not any work happens. Each is a
`Standing` (model.py); providers that hold them list them (`HoldsStanding`), the standing
stage of a cycle (stage.py) stores them and tracks since when each has been unused, the
policies of their kinds (`resource: volume | snapshot | address`) judge them (evaluate.py)
and act within the usual safety (act.py), and `costguard report` shows them as "paid for,
not running" (report.py).
"""
