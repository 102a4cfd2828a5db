"""Building a world that ships: choosing its cap from data (cap_curve) and growing it chunk by
chunk across sittings (grow). These run the pipeline's stages, so they sit above it."""
