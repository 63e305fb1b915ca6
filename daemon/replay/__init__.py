"""daemon.replay"""
