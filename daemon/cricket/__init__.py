"""daemon.cricket"""
