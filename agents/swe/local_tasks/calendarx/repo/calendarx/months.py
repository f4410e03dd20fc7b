from calendarx.rules import is_leap_year

_LENGTHS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def days_in_month(month, year):
    if not 1 <= month <= 12:
        raise ValueError(f"no month {month}")
    if month == 2 and is_leap_year(year):
        return 29
    return _LENGTHS[month - 1]


def days_in_year(year):
    return sum(days_in_month(month, year) for month in range(1, 13))
