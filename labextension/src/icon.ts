import { LabIcon } from '@jupyterlab/ui-components';

/** A chip with a pause sign: the panel's tab, the toolbar button and suspend. */
const chipPause = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M9 2h2v3H9zM13 2h2v3h-2zM9 19h2v3H9zM13 19h2v3h-2zM2 9h3v2H2zM2 13h3v2H2zM19 9h3v2h-3zM19 13h3v2h-3z"/>
    <path d="M6 5h12a1 1 0 0 1 1 1v12a1 1 0 0 1-1 1H6a1 1 0 0 1-1-1V6a1 1 0 0 1 1-1zm1 2v10h10V7z"/>
    <path d="M9.5 9h2v6h-2zM12.5 9h2v6h-2z"/>
  </g>
</svg>`;

export const gpuckptIcon = new LabIcon({
  name: 'jupyter-gpuckpt:chip-pause',
  svgstr: chipPause
});

/** A chip with a P, as on a parking sign: park. */
const chipPark = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M9 2h2v3H9zM13 2h2v3h-2zM9 19h2v3H9zM13 19h2v3h-2zM2 9h3v2H2zM2 13h3v2H2zM19 9h3v2h-3zM19 13h3v2h-3z"/>
    <path d="M6 5h12a1 1 0 0 1 1 1v12a1 1 0 0 1-1 1H6a1 1 0 0 1-1-1V6a1 1 0 0 1 1-1zm1 2v10h10V7z"/>
    <path fill-rule="evenodd" d="M9.5 8h3.25a2.75 2.75 0 0 1 0 5.5H11.5V16h-2zm2 1.75v2h1.25a1 1 0 0 0 0-2z"/>
  </g>
</svg>`;

export const parkIcon = new LabIcon({
  name: 'jupyter-gpuckpt:chip-park',
  svgstr: chipPark
});
