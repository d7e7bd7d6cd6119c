"""Executors that run evaluations away from this process: SLURM jobs through submitit.

The protocol and the local thread pool are in :mod:`harness.executors.local`; here live the
cluster executor (:mod:`.slurm`), the scheduler state queries it needs (:mod:`.jobstate`)
and the on-disk job list that lets a rerun reattach to a killed driver's jobs (:mod:`.joblist`).
"""
