"""The smart-city main job (``magnetar smart-city``); see docs/smart-city.md."""

from magnetar.demo.smart_city.settings import CitySettings

__all__ = ["CitySettings"]
