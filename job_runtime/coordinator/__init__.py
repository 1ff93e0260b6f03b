"""The checkpoint coordinator that runs in the driver."""
