"""PyTorch to bakeoff: its record, engine (eager, torch.compile), DDP strategies, probes, torchrun launchers,
deployment adapter and runtime. Importing this package imports no framework; its modules import PyTorch where they
need it."""
