"""Reading the user's repositories without touching them: the one git layer (:mod:`.gitrepo`),
private per-commit trees (:mod:`.workspaces`) and the pinned Megatron-LM trees (:mod:`.pins`)."""
