# Image import sources (owned by the image work).
target_sources(slipway_launcher PRIVATE)
