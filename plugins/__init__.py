"""Plugins bundled with the engine, imported as ``engine.plugins.<name>`` and discovered by name
like any third party's (entry points in the ``engine.plugins`` group)."""
