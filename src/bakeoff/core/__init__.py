"""Framework-free contracts: the spec, the framework records, the registry, identities, formats. Imports
nothing above it."""
