"""daemon.sportmonks"""
