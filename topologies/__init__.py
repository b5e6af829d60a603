"""topologies"""
