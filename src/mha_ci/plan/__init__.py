"""Which jobs an event runs, and why: events.py reads the event, matrix.py lists every job that
exists, policy.py decides, render.py prints the plan as text or JSON."""
