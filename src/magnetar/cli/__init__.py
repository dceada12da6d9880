"""magnetar.cli"""
