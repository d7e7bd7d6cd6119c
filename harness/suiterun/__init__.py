"""The driver's side of a suite run: start suite processes and read back what they wrote.

The driver (:mod:`.runner`: plan, argv, streaming; the fork server's client and pool
:mod:`.forkserver`; salvage of a child that died, :mod:`.salvage`, :mod:`.fatal`) starts pytest
on ``suites/`` with the plugin of :mod:`harness.suite`, which decides each case's verdict and
writes its cases. Nothing here imports :mod:`harness.suite`: what the two share (environment
names, flags, file names, the case id and the commit) is spelled once, in
:mod:`harness.contract` and :mod:`harness.target`; the record they exchange is
:class:`harness.records.results.CaseResult`.
"""
