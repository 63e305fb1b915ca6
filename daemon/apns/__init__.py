"""daemon.apns"""
