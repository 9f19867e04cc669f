"""dpfed protos package."""
