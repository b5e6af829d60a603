"""The gateway agent: runs inside the arm64 image with only Python 3.11, paho-mqtt and numpy."""
