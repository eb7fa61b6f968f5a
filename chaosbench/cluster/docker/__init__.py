"""The docker backend (backend.py) and its helpers: the docker CLI, the compose file, the images, the venv
volume and the memory cgroup squeeze."""
