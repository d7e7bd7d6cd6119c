"""One module per subcommand, each with ``add_parser`` and ``run(args) -> exit code``."""
