"""What the tests share: real child processes (procs), the crash kit that kills and relaunches
them (crashkit), the sub-agent family's kit (familykit), a TCP proxy that cuts the database off
(tcpproxy) and an authentication hook the service loads by name (authhook). Not tests themselves."""
