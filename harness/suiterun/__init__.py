"""The suite process and the driver that starts it: one wing, one contract.

A golden-suite run is two processes. The driver (:mod:`.runner`: plan, argv, streaming, the
fork server :mod:`.forkserver`, salvage of a child that died) starts pytest on ``suites/``;
the child loads the plugin (:mod:`.plugin`), decides each case's verdict (:mod:`.outcome`),
who owns an exception (:mod:`.ownership`), whether it is a known MB bug (:mod:`.known`), and
writes its cases. What the two share (environment names, flags, file names, the case id and
the commit) is spelled once, in :mod:`.contract`; the record they exchange is
:class:`harness.records.results.CaseResult`.
"""
