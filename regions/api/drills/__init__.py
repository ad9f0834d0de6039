"""The drills API: list, start, detail, abort. Imports the API's shared plumbing and
``regions.drills``; never another ``regions.api`` feature package.
"""
