"""Plugins bundled with the engine, discovered by name like any third party's."""
