"""Running checks: in which process, with which time limit, after which prerequisites."""
