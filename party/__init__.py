"""dpfed party package."""
