"""Developer tools (code generation); not used at run time."""
