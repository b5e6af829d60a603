"""Build-time helpers for the images: root filesystems and the files copied into them."""
