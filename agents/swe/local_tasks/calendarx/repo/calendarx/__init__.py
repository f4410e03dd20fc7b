from calendarx.months import days_in_month, days_in_year

__all__ = ["days_in_month", "days_in_year"]
