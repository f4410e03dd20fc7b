"""Gregorian calendar rules."""


def is_leap_year(year):
    return year % 4 == 0
