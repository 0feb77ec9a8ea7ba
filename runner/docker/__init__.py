"""Everything the Docker tier needs from the engine: the CLI wrapper, images, package
environments, and the container flags that make a sandbox."""
