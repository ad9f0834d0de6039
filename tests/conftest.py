import os
os.environ.setdefault("SECRET_KEY", "x")
