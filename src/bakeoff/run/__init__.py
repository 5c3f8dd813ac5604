"""How a trial's processes start, stop and die: process groups, signals, deadlines and the OOM-kill evidence."""
