"""Waste beyond idle: underused GPUs, their bottleneck, and the cheaper fit."""
