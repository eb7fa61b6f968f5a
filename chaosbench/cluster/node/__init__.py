"""Code that runs inside a node: the in-node scripts every backend ships (scripts.py, procs.py, nfqueue.py),
the FUSE disk layer (disk_layer.py) and the clock preload (clock.py, clockfix.c). The harness imports them
for what it must know of that code (a script to ship, a command line, the clock's control file); they
import nothing of the harness."""
