"""Plugin hosting: loading plugins, running them, their metrics."""
