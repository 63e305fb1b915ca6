"""daemon.store"""
