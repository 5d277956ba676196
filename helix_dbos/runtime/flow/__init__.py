"""A run's flow: the workflow and the kinds of work it orders over the floor.

The model request and its planning, call bodies (plain, transactional, local sub-agents),
reconcile checks, remote children, companions, live output. Internal. Imports ``process`` and
``floor``; never the public face.
"""
