"""An example third-party SRE agent for pytest-sremarathon."""
