"""The user's files: where they live, atomic writes, profiles, config.toml, and resolving settings."""
