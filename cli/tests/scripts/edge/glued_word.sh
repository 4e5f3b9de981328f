#!/bin/bash
#SBATCHfoo
echo
