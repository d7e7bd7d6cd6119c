"""MB's history as eras: which feature exists since which commit (:mod:`.features`), why a case
cannot run in an era (:mod:`.eragaps`), and the release-by-suite matrix (:mod:`.matrix`)."""
