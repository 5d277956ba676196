"""The process: what one launched Python process holds and polls, beneath any run.

Settings, DBOS's private door, the executor-id lock, leases and takeovers, the pollers, fault
injection and tracing. Internal: import from ``helix_dbos`` instead. Imports nothing from the
other runtime groups.
"""
