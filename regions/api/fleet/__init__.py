"""Fleet apply and export over HTTP: a thin view over parse, plan, apply and respond.
Imports the API's shared plumbing and ``regions.fleet``; never another ``regions.api`` feature
package.
"""
