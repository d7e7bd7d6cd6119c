"""MB's history as eras: why a case cannot run in an era (:mod:`.eragaps`) and the
release-by-suite matrix (:mod:`.matrix`); which feature exists since which commit is the ground
floor's :mod:`harness.features`, since the suite process asks it too."""
