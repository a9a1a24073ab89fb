"""The simulator: what a plugin author gives it, and where it is found."""
