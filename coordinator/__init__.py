"""dpfed coordinator package."""
